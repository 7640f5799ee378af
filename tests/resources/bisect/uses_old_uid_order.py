"""Bisect test case for a git range: passes while the installed `cudnn` stand-in (built from a
commit of a repository the test creates) still assigns UIDs by traversal, fails once it
assigns them in creation order."""

import cudnn

order = cudnn.uid_order()
print(f"VERDICT {'pass' if order == 'traversal' else 'fail'}: cudnn {cudnn.__version__} uid order {order}")
