"""Checks a screenshot of a kiln training report (standard library only).

Usage: report_render.py REPORT.html SCREENSHOT.png

Where each curve must be is computed from the numbers the report carries
(data-epochs, data-values, the axes' data-x-range, data-y-range and
data-plot) and the chart's fixed place on the page (its inline left/top),
never from the drawn points: a curve drawn in the wrong place fails. Along
every segment and at every epoch's dot, a pixel of the curve's colour must
be there; everywhere else in the plot, far from every curve, the
background; each legend swatch shows its curve's colour.
"""
import html.parser
import math
import re
import struct
import sys
import zlib

BACKGROUND = (255, 255, 255)
NEAR = 60          # colour distance that counts as the curve's colour
CLEAR = 7.0        # px from every curve beyond which the plot is background
STEP = 3           # background sample spacing, px


def read_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("%s is not a PNG" % path)
    at, idat, header = 8, b"", None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        sys.exit("PNG depth %d colour type %d interlace %d: not handled"
                 % (depth, colour, interlace))
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = bytearray(stride)
    rows = []
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, previous))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = previous[i]
                c = previous[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else
                                      b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        previous = line
    return width, height, rows


def numbers(text):
    return [float(v) for v in text.replace(",", " ").split()]


def hex_colour(text):
    return tuple(int(text[i:i + 2], 16) for i in (1, 3, 5))


class Report(html.parser.HTMLParser):
    """The charts: place, axes, curves (from their numbers), legend."""

    def __init__(self):
        super().__init__()
        self.charts, self.chart, self.in_legend = [], None, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "chart" in a.get("class", "").split():
            place = re.search(r"left:\s*(\d+)px;\s*top:\s*(\d+)px", a["style"])
            self.chart = {"id": a["id"], "left": int(place.group(1)),
                          "top": int(place.group(2)), "plot": numbers(a["data-plot"]),
                          "x": numbers(a["data-x-range"]), "y": numbers(a["data-y-range"]),
                          "series": [], "legend": []}
            self.charts.append(self.chart)
        elif tag == "polyline" and a.get("class") == "series" and self.chart:
            self.chart["series"].append({
                "name": a["data-series"], "colour": hex_colour(a["stroke"]),
                "epochs": numbers(a["data-epochs"]), "values": numbers(a["data-values"])})
        elif tag == "g" and a.get("class") == "legend":
            self.in_legend = True
        elif tag == "line" and self.in_legend:
            self.chart["legend"].append((hex_colour(a["stroke"]),
                                         (float(a["x1"]) + float(a["x2"])) / 2,
                                         float(a["y1"])))

    def handle_endtag(self, tag):
        if tag == "svg":
            self.chart = None
        elif tag == "g":
            self.in_legend = False


def page_points(chart, series):
    """Where the numbers put the curve's points on the page."""
    x0, y0, w, h = chart["plot"]
    (xlo, xhi), (ylo, yhi) = chart["x"], chart["y"]
    return [(chart["left"] + x0 + (e - xlo) / (xhi - xlo) * w,
             chart["top"] + y0 + h - (v - ylo) / (yhi - ylo) * h)
            for e, v in zip(series["epochs"], series["values"])]


def distance_to_segment(p, a, b):
    (px, py), (ax, ay), (bx, by) = p, a, b
    dx, dy = bx - ax, by - ay
    length2 = dx * dx + dy * dy
    t = 0 if length2 == 0 else max(0, min(1, ((px - ax) * dx + (py - ay) * dy) / length2))
    return math.hypot(px - ax - t * dx, py - ay - t * dy)


def distance_to_curve(p, points):
    if len(points) == 1:
        return math.hypot(p[0] - points[0][0], p[1] - points[0][1])
    return min(distance_to_segment(p, points[i], points[i + 1])
               for i in range(len(points) - 1))


def colour_distance(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def main():
    report, png = sys.argv[1], sys.argv[2]
    parser = Report()
    parser.feed(open(report, encoding="utf-8").read())
    width, height, rows = read_png(png)
    print("screenshot %dx%d, %d charts" % (width, height, len(parser.charts)))
    failures = []

    def near(x, y, colour):
        """A pixel of `colour` at (x, y) or next to it."""
        cx, cy = int(math.floor(x)), int(math.floor(y))
        return any(0 <= cx + i < width and 0 <= cy + j < height and
                   colour_distance(rows[cy + j][cx + i], colour) <= NEAR
                   for i in (-1, 0, 1) for j in (-1, 0, 1))

    if not parser.charts:
        failures.append("no charts in the report")
    for chart in parser.charts:
        curves = [(s, page_points(chart, s)) for s in chart["series"]]
        if not curves:
            failures.append("chart %s has no curve" % chart["id"])
        drawn = 0
        for series, points in curves:
            others = [p for s, p in curves if s is not series]

            def hidden(p):
                return any(distance_to_curve(p, o) < 5 for o in others)

            samples = list(points)
            for a, b in zip(points, points[1:]):
                samples += [(a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1]))
                            for t in (0.2, 0.35, 0.5, 0.65, 0.8)]
            for p in samples:
                if hidden(p):
                    continue
                drawn += 1
                if not near(p[0], p[1], series["colour"]):
                    failures.append("chart %s, %s: no curve pixel at (%.1f, %.1f), found %s"
                                    % (chart["id"], series["name"], p[0], p[1],
                                       rows[int(p[1])][int(p[0])]))
        names = {s["colour"] for s in chart["series"]}
        if {c for c, _, _ in chart["legend"]} != names:
            failures.append("chart %s: the legend's colours are not its curves'" % chart["id"])
        for colour, x, y in chart["legend"]:
            if not near(chart["left"] + x, chart["top"] + y, colour):
                failures.append("chart %s: legend swatch at (%.0f, %.0f) is not drawn"
                                % (chart["id"], chart["left"] + x, chart["top"] + y))
        x0, y0, w, h = chart["plot"]
        left, top = chart["left"] + x0, chart["top"] + y0
        clear = wrong = 0
        for y in range(int(top) - 2, int(top + h) + 3, STEP):
            for x in range(int(left) - 2, int(left + w) + 3, STEP):
                centre = (x + 0.5, y + 0.5)
                if any(distance_to_curve(centre, p) < CLEAR for _, p in curves):
                    continue
                clear += 1
                if colour_distance(rows[y][x], BACKGROUND) > 8:
                    wrong += 1
                    if wrong <= 5:
                        failures.append("chart %s: (%d, %d) is %s, not background"
                                        % (chart["id"], x, y, rows[y][x]))
        print("chart %-13s at (%d, %d): %d curves, %d curve samples, %d background samples"
              "%s" % (chart["id"], chart["left"], chart["top"], len(curves), drawn, clear,
                      ", %d not background" % wrong if wrong else ""))
    for f in failures:
        print("FAIL: " + f)
    sys.exit(1 if failures else 0)


main()
