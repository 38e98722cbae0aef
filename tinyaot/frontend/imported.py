"""A model imported once: the IR graph and the float ONNX model it came from, read from its file one time and handed
to every stage that needs it (compile, the width search, the uncompressed re-compile, analyze, evaluate).

The graph here is never changed: `fresh_graph()` gives each compilation its own deep copy to run the passes on.
Each model format has its reader (onnx_import.py, tflite_import.py); `import_model` picks it and returns the same
object.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tinyaot.ir import Graph

from .onnx_import import import_onnx_model
from .tflite_import import import_tflite, is_tflite

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class ImportedModel:
    path: Path
    graph: Graph  # as imported, before any pass; do not change it (fresh_graph() is the copy to work on)
    onnx_model: onnx.ModelProto | None  # the checked, shape-inferred float ONNX model (calibration runs it in
    # onnxruntime); None for an int8 .tflite model

    def fresh_graph(self) -> Graph:
        return copy.deepcopy(self.graph)

    @property
    def inputs(self) -> list[dict]:
        """The model inputs' names, shapes and dtypes (graph.meta["inputs"])."""
        return self.graph.meta["inputs"]


def import_model(model: str | Path | ImportedModel, input_shapes=None) -> ImportedModel:
    """`model` imported (a path), or as it is (already an ImportedModel)."""
    if isinstance(model, ImportedModel):
        return model
    path = Path(model)
    if is_tflite(path):
        return ImportedModel(path, import_tflite(path, input_shapes), None)
    graph, proto = import_onnx_model(path, input_shapes)
    return ImportedModel(path, graph, proto)
