from .onnx_import import import_onnx, import_onnx_model, load_onnx, parse_input_shapes

__all__ = ["import_onnx", "import_onnx_model", "load_onnx", "parse_input_shapes"]
