from .onnx_import import import_onnx, load_onnx, parse_input_shapes

__all__ = ["import_onnx", "load_onnx", "parse_input_shapes"]
