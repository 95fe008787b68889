"""Turning records and projections into text for the terminal: the inspect view, the live
stream rendering, the transcript, usage stats, labels of what happened, one trace point.

Views print through the consoles of ``terminal``; they do not decide which session or file a
command works on.
"""
