"""Reports built from saved records only (depends on core, config and errors).

``load`` reads run directories, ``build`` turns records into the report model,
``render_text`` / ``render_md`` / ``render_html`` lay it out, ``write`` ties them up:
``write_reports(run_dirs, out_dir) -> paths`` writes every format (what ``specproxy
demo`` and ``replay`` call at the end of a run).
"""

from specproxy.report.write import write_reports

__all__ = ["write_reports"]
