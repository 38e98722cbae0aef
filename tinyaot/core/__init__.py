"""The numerics core: quantization parameters and their arithmetic (quant.py), TFLite/CMSIS-NN fixed point
(fixedpoint.py), C literal formatting (cfmt.py) and the user-facing error (errors.py).

It imports nothing else of tinyaot, so every other layer (ir, ops, passes, compress, codegen, ...) may use it;
tests/test_layering.py keeps it that way.
"""
