"""ONNX operators that tinyaot accepts but that never reach code generation: passes remove or rewrite them
(Identity/Dropout are dropped, BatchNormalization folds into its producer, MatMul/Gemm become FullyConnected,
Div by a constant becomes Mul by its reciprocal,
Flatten/Squeeze/Unsqueeze become Reshape aliases, the QuantizeLinear/DequantizeLinear of a pre-quantized model are
absorbed into tensor quantization parameters). They are registered so the import check knows them."""
from .registry import OpSpec, Traits, register

_TRAITS = {
    # reshapes: the layout pass turns them into aliases
    "Flatten": Traits(layout="move", reshape=True), "Squeeze": Traits(layout="move", reshape=True),
    "Unsqueeze": Traits(layout="move", reshape=True),
    "BatchNormalization": Traits(layer_1d=True),  # per channel over [N, C, L] as over [N, C, 1, L]
    # become FullyConnected, which dequantizes or keeps a pre-quantized model's integer weights
    "MatMul": Traits(quantized_constants=True), "Gemm": Traits(quantized_constants=True),
}
for _op in ("Identity", "Dropout", "BatchNormalization", "MatMul", "Gemm", "Flatten", "Squeeze", "Unsqueeze",
            "QuantizeLinear", "DequantizeLinear", "Div"):
    register(_op, traits=_TRAITS.get(_op))(
        type(_op, (OpSpec,), {"__doc__": f"ONNX {_op}: removed or rewritten by the passes."}))
