from pathlib import Path

from .onnx_import import import_onnx, import_onnx_model, is_prequantized, load_onnx, parse_input_shapes
from .tflite_import import import_tflite, is_tflite


def import_model(path, input_shapes=None):
    """(IR graph, the checked float ONNX model or None): an int8 .tflite file (frontend/tflite_import.py) has no
    ONNX model; anything else is read as ONNX."""
    if is_tflite(Path(path)):
        return import_tflite(Path(path), input_shapes), None
    return import_onnx_model(Path(path), input_shapes)


__all__ = ["import_model", "import_onnx", "import_onnx_model", "import_tflite", "is_prequantized", "is_tflite",
           "load_onnx", "parse_input_shapes"]
