"""`ratchet serve`: an OpenAI-compatible HTTP endpoint on Ray Serve, backed by the SamplerPool.

    from search.serve import ServeSettings, build_serve_app
    serve.run(build_serve_app(ServeSettings(checkpoint="/ckpt/v0")), route_prefix="/")

`app` holds the HTTP behaviour (testable without Ray), `deployment` the Ray Serve shell.
"""

from search.serve.deployment import OpenAIServer, PoolBackend, ServeSettings, build_serve_app

__all__ = ["OpenAIServer", "PoolBackend", "ServeSettings", "build_serve_app"]
