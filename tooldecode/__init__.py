"""tooldecode: what grammar-constrained ("strict") decoding changes in tool calls, measured on local models.

Import-light on purpose: ``tooldecode.grammar`` and ``tooldecode.repair`` must import without
torch, transformers or llama_cpp.
"""

__version__ = "0.1.0"
