"""argparse help for the eval commands: each option's default stated once, in the form a user types it."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help unless the help already states its default ("default:") or
    there is none worth stating (None, False, empty); a list default prints as the comma list the option takes."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text, default = action.help or "", action.default
        if (not text or "default:" in text.lower() or not action.option_strings or default is None
                or default is False or default is argparse.SUPPRESS or default in ("", [], ())):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"  # the help text is %-formatted next
