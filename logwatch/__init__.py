"""logwatch: watch LLM inference servers (SGLang, vLLM) start up and serve, from their logs."""

import warnings

__version__ = "0.1.0"

# asyncssh imports cryptography's DSA key classes, which cryptography 51 deprecates with a
# warning at each import: ten lines on stderr before every command's own output (a `--check`
# answer is one line), nothing a user of logwatch can act on.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
