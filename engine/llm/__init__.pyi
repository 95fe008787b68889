"""The public names of ``engine.llm``, listed once.

Type checkers read this stub; at run time ``engine/llm/__init__.py`` derives ``__all__`` and the
lazy ``__getattr__`` (PEP 562) from the same lines (``lazy_loader.attach_stub``), so a name
is exported by adding its import here and nowhere else.
"""

from ._anthropic import Anthropic as Anthropic
from ._openai import OpenAICompatible as OpenAICompatible
from ._scripted import (
    DEFAULT_SCRIPT as DEFAULT_SCRIPT,
    Script as Script,
    ScriptedEnvironment as ScriptedEnvironment,
    ScriptedLLM as ScriptedLLM,
    load_script as load_script,
)
