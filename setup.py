"""The optional C speedups; everything else about the package is in pyproject.toml.

``specproxy.core._speedups`` is built when a C compiler and Python's headers are there
(``optional``: without them the install goes on, and the Python paths are used).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "specproxy.core._speedups",
            ["specproxy/core/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
