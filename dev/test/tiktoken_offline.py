"""Load tiktoken's "gpt2" encoding without a network.

tiktoken reads its files from $TIKTOKEN_CACHE_DIR, each named by the SHA-1 hex digest of
the URL it would download from. This module copies data/gpt2/vocab.bpe and encoder.json
into such a cache under build/tiktoken_cache (git-ignored) and returns the encoding.

    from tiktoken_offline import gpt2_encoding
    enc = gpt2_encoding()
"""
import hashlib
import os
import shutil

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
URLS = {  # as written in tiktoken_ext/openai_public.py (tiktoken 0.14)
    "vocab.bpe": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
    "encoder.json": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
}


def setup_cache(src_dir=None, cache_dir=None):
    src_dir = src_dir or os.path.join(REPO, "data", "gpt2")
    cache_dir = cache_dir or os.path.join(REPO, "build", "tiktoken_cache")
    os.makedirs(cache_dir, exist_ok=True)
    for name, url in URLS.items():
        src = os.path.join(src_dir, name)
        if not os.path.exists(src):
            raise SystemExit(f"error: {src} is missing (the GPT-2 tokenizer files belong in data/gpt2/)")
        dst = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
        if not os.path.exists(dst) or os.path.getsize(dst) != os.path.getsize(src):
            shutil.copyfile(src, dst + ".tmp")
            os.replace(dst + ".tmp", dst)
    os.environ["TIKTOKEN_CACHE_DIR"] = cache_dir
    return cache_dir


def gpt2_encoding():
    setup_cache()
    import tiktoken

    return tiktoken.get_encoding("gpt2")


if __name__ == "__main__":
    enc = gpt2_encoding()
    print(enc.name, enc.n_vocab, enc.encode("Hello world"))
