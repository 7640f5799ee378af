"""A missing module is the environment's fault: error."""
import cudnn_matrix_no_such_module  # noqa: F401
