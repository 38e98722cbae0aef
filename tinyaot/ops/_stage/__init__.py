from . import add_op, conv_op, fc_op, pool_op, softmax_op  # noqa: F401
