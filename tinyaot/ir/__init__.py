from .graph import Graph, Node, QuantParams, Tensor
from .verify import IRError, UnknownOp, verify

__all__ = ["Graph", "Node", "QuantParams", "Tensor", "IRError", "UnknownOp", "verify"]
