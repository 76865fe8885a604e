"""Reports built from saved records only (depends on core, config and errors).

``load`` reads run directories, ``build`` turns records into the report model,
``render_text`` / ``render_md`` / ``render_html`` lay it out, ``write`` ties them up.
"""
