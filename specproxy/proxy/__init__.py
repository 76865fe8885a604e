"""The drop-in OpenAI/SGLang-compatible proxy: passthrough, mirror and split.

Entry points: ``proxy.server.run_proxy(config)`` (until SIGTERM/SIGINT) and
``proxy.server.serve_proxy_in_background(config)`` (an async context manager yielding
the base URL), both taking a ``proxy.config.ProxyConfig``. Modules, in the order a relayed
request meets them: ``intake`` and ``lean`` (the server's connection: reading, then
planning and serving, with ``core``'s pure pieces: the headers read, the body shaped, the
sides decided), ``relay`` (primary to client, shadow in the background), ``client_answer``
(the client's answer), ``records`` (its records and metric updates). Beside them:
``config`` (options), ``routes`` (the route table and the proxy's own routes),
``messages`` (answers the proxy writes itself), ``lifecycle`` (start/stop of backends,
recording, relay), ``metrics`` (the proxy's own counters, read out).
"""
