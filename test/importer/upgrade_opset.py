"""ONNX's older test models (pytorch-converted: IR 3, opset 6) raised to
opset 11 with ONNX's own version converter, for test_onnx_conformance.c:
kiln imports opsets 11 to 18 and IR 6 to 9.

    upgrade_opset.py LIST

LIST holds lines "SRC DST": each model SRC is converted and written to DST;
one that ONNX's converter cannot convert is left unwritten (the runner says
so). Exits 77 when onnx is missing."""
import sys

try:
    import onnx
    from onnx import version_converter
except ImportError:
    print("onnx is not installed for /usr/bin/python3 (Debian: python3-onnx)")
    sys.exit(77)

OPSET = 11
IR = 6   # the IR version that came with opset 11 (ONNX 1.6)

with open(sys.argv[1]) as f:
    for line in f:
        src, dst = line.split()
        model = onnx.load(src)
        try:
            model = version_converter.convert_version(model, OPSET)
        except Exception as e:   # the converter's own limits: not kiln's
            print(f"{src}: not converted: {e}", file=sys.stderr)
            continue
        # The converter keeps IR 3, whose initializers are graph inputs too:
        # IR 6 reads the same graph.
        model.ir_version = max(model.ir_version, IR)
        onnx.save(model, dst)
