from .imported import ImportedModel, import_model
from .onnx_import import import_onnx_model, is_prequantized, load_onnx
from .tflite_import import import_tflite, is_tflite

__all__ = ["ImportedModel", "import_model", "import_onnx_model", "import_tflite", "is_prequantized", "is_tflite",
           "load_onnx"]
