"""ONNX operators that tinyaot accepts but that never reach code generation: passes remove or rewrite them
(Identity/Dropout are dropped, BatchNormalization folds into its producer, MatMul/Gemm become FullyConnected,
Flatten/Squeeze/Unsqueeze become Reshape aliases, the QuantizeLinear/DequantizeLinear of a pre-quantized model are
absorbed into tensor quantization parameters). They are registered so the import check knows them."""
from .registry import OpSpec, Traits, register

_MOVES = ("Flatten", "Squeeze", "Unsqueeze")  # data movement: the layout pass turns them into aliases
for _op in ("Identity", "Dropout", "BatchNormalization", "MatMul", "Gemm", "Flatten", "Squeeze", "Unsqueeze",
            "QuantizeLinear", "DequantizeLinear"):
    register(_op, traits=Traits(layout="move") if _op in _MOVES else None)(
        type(_op, (OpSpec,), {"__doc__": f"ONNX {_op}: removed or rewritten by the passes."}))
