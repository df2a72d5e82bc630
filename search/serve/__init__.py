"""`ratchet serve`: an OpenAI-compatible HTTP endpoint on Ray Serve, backed by the SamplerPool.

    from search.serve import ServeSettings, build_serve_app
    serve.run(build_serve_app(ServeSettings(checkpoint="/ckpt/v0")), route_prefix="/")

`app` holds the HTTP behaviour (testable without Ray), `deployment` the Ray Serve shell;
`guard` checks the token and body size before parsing, `protocol` the wire format, `limits`
the per-request caps, `streaming` the server-sent events.
"""

from search.serve.deployment import OpenAIServer, PoolBackend, ServeSettings, build_serve_app
from search.serve.limits import ServeLimits

__all__ = ["OpenAIServer", "PoolBackend", "ServeLimits", "ServeSettings", "build_serve_app"]
