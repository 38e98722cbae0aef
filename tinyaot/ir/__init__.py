from .graph import Graph, Node, QuantParams, Tensor
from .verify import IRError, verify

__all__ = ["Graph", "Node", "QuantParams", "Tensor", "IRError", "verify"]
