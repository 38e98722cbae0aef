"""A BatchNormalization that `fold_batchnorm` could not fold (its input does not come straight from a Conv or
FullyConnected: sww_dscnn's last one follows a Reshape) becomes a depthwise 1x1 Conv.

In inference mode BN is y[c] = k[c] * x[c] + (beta[c] - mean[c] * k[c]) with k = gamma / sqrt(var + eps): a
per-channel scale and shift, which is exactly a depthwise 1x1 convolution (group = C, weight k[c], bias the shift).
That reuses the int8 depthwise kernel (no new kernel, C weight bytes), and a following Relu fuses into it like
into any Conv, which is why this pass runs before `fuse_activation`.

- 4-D input [N, C, H, W]: the Conv writes the BN's output tensor directly, so its calibrated range carries over.
- 2-D input [N, C] (BN after a flatten): Reshape to [N, C, 1, 1], the same Conv, Reshape back. In NHWC both
  reshapes are free aliases (1x1 spatial), so this costs C weights, where a FullyConnected with a diagonal C x C
  weight would cost C * C. The reshaped tensors take their ranges across the moves. A Relu after it stays a
  standalone (in-place) clamp, since its producer is then the Reshape.
- Any other rank, or statistics that are not constants, is a clear error rather than an op without a kernel.
"""
import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node


def batchnorm_to_conv(graph: Graph) -> Graph:
    for bn in [n for n in graph.nodes if n.op == "BatchNormalization"]:
        x, y = bn.inputs[0], bn.outputs[0]
        rank = len(graph.tensors[x].shape)
        if any(o and graph.consumers(o) for o in bn.outputs[1:]):
            raise TinyaotError(f"BatchNormalization node {bn.name!r}: training-mode outputs (running mean/var) "
                               "are not supported; export the model in inference mode")
        if len(bn.inputs) < 5 or not all(graph.tensors[i].is_const for i in bn.inputs[1:5]):
            raise TinyaotError(f"BatchNormalization node {bn.name!r}: scale, bias, mean and variance must be "
                               "constants")
        if rank not in (2, 4):
            raise TinyaotError(f"BatchNormalization node {bn.name!r} on a {rank}-D tensor is not supported (only "
                               "4-D [N,C,H,W] and 2-D [N,C] inputs are)")
        gamma, beta, mean, var = (graph.tensors[i].data.astype(np.float64).reshape(-1) for i in bn.inputs[1:5])
        eps = float(bn.attrs.get("epsilon", 1e-5))
        k = gamma / np.sqrt(var + eps)
        c = graph.tensors[x].shape[1]
        w = graph.add_const(f"{bn.name}_dw_weight", k.reshape(c, 1, 1, 1).astype(np.float32))
        b = graph.add_const(f"{bn.name}_dw_bias", (beta - mean * k).astype(np.float32))
        attrs = {"group": c, "kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0],
                 "dilations": [1, 1]}
        at = graph.nodes.index(bn)
        if rank == 4:
            new = [Node("Conv", bn.name, [x, w, b], [y], attrs)]
        else:
            n = graph.tensors[x].shape[0]
            x4 = graph.add_tensor(f"{x}_4d", (n, c, 1, 1))
            y4 = graph.add_tensor(f"{y}_4d", (n, c, 1, 1))
            to_4d = graph.fresh_node_name(f"{bn.name}_to_4d")
            new = [Node("Reshape", to_4d, [x], [x4], {}),
                   Node("Conv", bn.name, [x4, w, b], [y4], attrs),
                   Node("Reshape", graph.fresh_node_name(f"{bn.name}_to_2d", [to_4d]), [y4], [y], {})]
        graph.nodes[at:at + 1] = new
    graph.remove_unused_tensors()
    return graph
