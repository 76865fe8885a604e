"""The drop-in OpenAI/SGLang-compatible proxy: passthrough, mirror and split.

Entry points: ``proxy.server.run_proxy(config)`` (until SIGTERM/SIGINT) and
``proxy.server.serve_proxy_in_background(config)`` (an async context manager yielding
the base URL), both taking a ``proxy.config.ProxyConfig``. Modules: ``config``
(options), ``app`` (a relayed request planned: its side decisions, what is added upstream
and stripped downstream), ``relay`` (primary to client, shadow in the background, records),
``routes`` (its own routes), ``lifecycle`` (start/stop of backends, recording, relay), ``metrics``
(the proxy's own counters), ``responses`` (errors the proxy writes itself).
"""
