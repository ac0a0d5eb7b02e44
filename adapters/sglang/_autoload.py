"""``.pth`` activation for SGLang without a plugin system (or as a safety net).

The one-line ``fib_runtime_autoload.pth`` in site-packages runs in **every** Python process of
the environment (pip included); it imports this module only when ``FIB_ENABLE_APPLY`` or
``FIB_ENABLE_TRACING`` is on, and this module only registers post-import hooks (wrapt) on
SGLang's sampler module, importing nothing heavy itself. When a process has imported SGLang's
sampler (every scheduler does, before it builds its model runner), the hook calls
:func:`fib_runtime.adapters.sglang.register`, which is re-entrant: with the plugin entry point
also active, the work happens once per process. (No hook on ``server_args``: it is imported
while the sampler module is still initialising, and SGLang versions that need this fallback
have no sampler-backend registry anyway.) Spawned schedulers re-run ``site``, so the hook
reaches every one of them. A failure here is swallowed: it must never break interpreter start.
"""

from __future__ import annotations


def _hook(_module) -> None:
    try:
        from fib_runtime.adapters.sglang import register

        register()
    except Exception:
        pass


def install() -> None:
    try:
        import wrapt

        wrapt.register_post_import_hook(_hook, "sglang.srt.layers.sampler")
    except Exception:
        pass


install()
