"""Test helpers: servers with known timing, recorded streams, misbehaving children, real vLLM servers."""
