"""The terminal: consoles that never interpret untrusted text, escaping of trace content
(``safe``), JSON on stdout, warnings, a closed pipe, and library logs routed to stderr.
"""
