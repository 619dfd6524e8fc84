#!/usr/bin/python3
"""Writes the handmade images of test_image_folder and what PIL decodes.

For each case NAME: the file NAME, NAME.rgb (what PIL decodes it to as
8-bit RGB, alpha dropped) and NAME.gray (PIL's gray: the file's own for
gray files, libjpeg's Y channel for colour JPEG, convert("L") for colour
PNG); cases.txt lists "NAME WIDTH HEIGHT gray|colour". 16-bit files are
written here and their references scaled to 8 bits with rounding (PIL keeps
16-bit gray as it is and cuts 16-bit colour to its high byte). Exits 77
without PIL. Usage: image_cases.py OUT
"""
import os
import random
import struct
import sys
import zlib

try:
    from PIL import Image
except ImportError:
    print("PIL (python3-pil) is not installed")
    sys.exit(77)


def chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))


def png16(width, height, color_type, samples):
    """A 16-bit PNG (no filter) of big-endian samples, row after row."""
    per_row = len(samples) // height
    raw = b"".join(b"\x00" + struct.pack(">%dH" % per_row, *samples[r * per_row:(r + 1) * per_row])
                   for r in range(height))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def to8(v):
    return (v * 255 + 32767) // 65535


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(20240611)
    cases = []

    def noise(n):
        return bytes(rng.randrange(256) for _ in range(n))

    def smooth(w, h, c):
        """A gradient with a little noise, so that JPEG keeps it well."""
        return bytes(max(0, min(255, (x * 255 // max(w - 1, 1) + y * 97 // max(h - 1, 1) +
                                      k * 60 + rng.randrange(-8, 9)) % 256))
                     for y in range(h) for x in range(w) for k in range(c))

    def record(name, w, h, rgb, gray, colour):
        for ext, data in ((".rgb", rgb), (".gray", gray)):
            with open(os.path.join(out, name + ext), "wb") as f:
                f.write(data)
        cases.append("%s %d %d %s" % (name, w, h, "colour" if colour else "gray"))

    def pil_gray(w, h, rgb):
        return Image.frombytes("RGB", (w, h), rgb).convert("L").tobytes()

    def save(name, im, **kw):
        """Saves im, then records what PIL decodes the file to."""
        im.save(os.path.join(out, name), **kw)
        d = Image.open(os.path.join(out, name))
        rgb = d.convert("RGB").tobytes()
        colour = d.mode not in ("L", "LA", "I;16", "I")
        if name.endswith(".png"):
            gray = pil_gray(d.size[0], d.size[1], rgb) if colour else d.convert("L").tobytes()
        else:
            d = Image.open(os.path.join(out, name))
            d.draft("L", d.size)   # libjpeg's own gray, as TurboJPEG's TJPF_GRAY
            assert d.mode == "L" and d.size == im.size
            gray = d.tobytes()
        record(name, d.size[0], d.size[1], rgb, gray, colour)

    def write16(name, w, h, color_type, values):
        """A 16-bit PNG written here: PIL cuts 16-bit colour to its high byte."""
        with open(os.path.join(out, name), "wb") as f:
            f.write(png16(w, h, color_type, values))
        per = {0: 1, 2: 3, 6: 4}[color_type]
        eight = [to8(v) for i, v in enumerate(values) if per < 4 or i % 4 != 3]
        if per == 1:
            record(name, w, h, bytes(g for g in eight for _ in range(3)), bytes(eight), False)
        else:
            rgb = bytes(eight)
            record(name, w, h, rgb, pil_gray(w, h, rgb), True)

    # PNG, 8-bit: gray (with tRNS too), RGB, RGBA (alpha 0 included), palette
    # with tRNS.
    save("gray.png", Image.frombytes("L", (13, 7), noise(13 * 7)))
    save("gray_trns.png", Image.frombytes("L", (6, 5), noise(30)), transparency=17)
    save("rgb.png", Image.frombytes("RGB", (9, 11), noise(9 * 11 * 3)))
    save("rgba.png", Image.frombytes("RGBA", (8, 6), noise(8 * 6 * 4)))
    im = Image.new("P", (10, 4))
    im.putpalette([c for i in range(7) for c in (i * 37, 255 - i * 30, (i * 91) % 256)])
    im.putdata([rng.randrange(7) for _ in range(40)])
    save("palette.png", im, transparency=3)
    # PNG, 16-bit: values chosen here (0, 65535 and the middle included).
    write16("gray16.png", 8, 5, 0,
            [rng.randrange(65536) for _ in range(35)] + [0, 65535, 128, 32767, 32768])
    write16("rgb16.png", 5, 3, 2, [rng.randrange(65536) for _ in range(5 * 3 * 3)])
    write16("rgba16.png", 4, 3, 6, [rng.randrange(65536) for _ in range(4 * 3 * 4)])
    # JPEG: gray, colour at 4:2:0 and 4:4:4, progressive.
    save("gray.jpg", Image.frombytes("L", (17, 9), smooth(17, 9, 1)), quality=90)
    save("rgb420.jpg", Image.frombytes("RGB", (19, 13), smooth(19, 13, 3)), quality=90,
         subsampling=2)
    save("rgb444.jpg", Image.frombytes("RGB", (11, 7), smooth(11, 7, 3)), quality=90,
         subsampling=0)
    save("progressive.jpg", Image.frombytes("RGB", (16, 16), smooth(16, 16, 3)), quality=90,
         progressive=True)
    with open(os.path.join(out, "cases.txt"), "w") as f:
        f.write("\n".join(cases) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
