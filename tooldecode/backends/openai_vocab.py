"""The model's tokenizer for the ``openai`` backend: a ``.gguf`` loaded vocabulary-only (the weights stay
on the server)."""

from __future__ import annotations

from tooldecode.backends.base import llama_piece, llama_tokenize
from tooldecode.errors import ModelError
from tooldecode.models import ModelRef


class GGUFVocab:
    """Token ids and bytes from a ``.gguf`` file loaded vocabulary-only (no weights).

    Parameters
    ----------
    ref : ModelRef
        A ``.gguf`` model (a folder is refused with a one-line error).
    """

    def __init__(self, ref: ModelRef) -> None:
        if not ref.is_gguf:
            raise ModelError(
                f"--backend openai reads the tokenizer from a .gguf file; '{ref.path}' is a folder "
                "(pass the model's .gguf id or path with --model)"
            )
        from tooldecode.backends.llamacpp import llama_cpp_module, read_gguf

        llama_cpp = llama_cpp_module()
        self._lc = llama_cpp
        try:
            self._model = read_gguf(llama_cpp, ref.path, vocab_only=True)
        except ValueError:
            raise ModelError(f"llama.cpp could not read the vocabulary of '{ref.path}'") from None
        self.vocab = self._model.vocab
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.eog_ids = frozenset(
            i for i in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, i)
        )
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    def tokenize(self, text: str, special: bool, add_bos: bool) -> list[int]:
        """Token ids of ``text`` (special-token text parsed when ``special``)."""
        return llama_tokenize(self._lc, self.vocab, text, add_bos=add_bos and self.add_bos, special=special)

    def piece(self, token_id: int, special: bool) -> bytes:
        """The bytes of one token (special tokens as their text when ``special``, else empty)."""
        return llama_piece(self._lc, self.vocab, token_id, special=special)

    def close(self) -> None:
        model = getattr(self, "_model", None)
        if model is not None:
            model.close()
            self._model = None
