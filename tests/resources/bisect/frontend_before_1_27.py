"""Bisect test case: passes on a cuDNN frontend older than 1.27, fails from 1.27 on.

Stands in for a regression introduced by a frontend release (no GPU needed): it only imports
the installed frontend and reads its version.
"""

import cudnn

major, minor = (int(part) for part in cudnn.__version__.split(".")[:2])
if (major, minor) >= (1, 27):
    print(f"VERDICT fail: frontend {cudnn.__version__} is >= 1.27")
else:
    print(f"VERDICT pass: frontend {cudnn.__version__} is < 1.27")
