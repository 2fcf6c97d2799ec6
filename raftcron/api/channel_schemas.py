"""The schemas of /v1/channels bodies and of a job's channel references (core.channels),
built from the constants the validators use."""

from __future__ import annotations

from typing import Any

from raftcron.api.schemas import HTTP_URL, NAME, anchored
from raftcron.core import channels

_SECRET_VALUE = {"type": "object", "required": ["secret"], "additionalProperties": False,
                 "properties": {"secret": {"type": "string", "minLength": 1,
                                           "maxLength": channels.MAX_SECRET}},
                 "description": 'the password itself, held in the replicated state and never '
                                'shown back (reads give "***"; sending "***" keeps the stored '
                                'one while host, port and username stay the same)'}
_ADDRESS = {"type": "string", "pattern": anchored(channels.EMAIL_RE)}
SLACK = {"type": "object", "required": ["webhook_url"], "additionalProperties": False,
         "properties": {"webhook_url": HTTP_URL},
         "description": "a Slack incoming webhook: messages carry text and blocks"}
EMAIL = {
    "type": "object", "additionalProperties": False, "required": ["host", "from", "to"],
    "dependentRequired": {"username": ["password"], "password": ["username"]},
    # A password is never sent in clear.
    "if": {"required": ["password"]}, "then": {"properties": {"starttls": {"const": True}}},
    "description": "SMTP; with starttls (the default) the connection is upgraded with "
                   "STARTTLS and the server's certificate checked before anything is sent",
    "properties": {
        "host": {"type": "string", "maxLength": channels.MAX_HOST,
                 "pattern": anchored(channels.HOST_RE)},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                 "default": channels.DEFAULT_SMTP_PORT},
        "starttls": {"type": "boolean", "default": True},
        "from": _ADDRESS,
        "to": {"type": "array", "minItems": 1, "maxItems": channels.MAX_RECIPIENTS,
               "items": _ADDRESS},
        "username": {"type": "string", "pattern": anchored(channels.USERNAME_RE)},
        "password": _SECRET_VALUE,
    },
}
WEBHOOK = {"type": "object", "required": ["url"], "additionalProperties": False,
           "properties": {"url": HTTP_URL},
           "description": "a signed webhook, as a notify URL gets it (signed with the "
                          "tenant's key)"}
CHANNEL_INPUT: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "oneOf": [{"required": [kind]} for kind in channels.KINDS],
    "properties": {
        "tenant": NAME,
        "slack": SLACK, "email": EMAIL, "webhook": WEBHOOK,
        "mute": {"type": ["string", "null"], "pattern": NAME["pattern"],
                 "description": "a calendar of the channel's tenant: a message written "
                                "while it excludes that instant is held, and one summary of "
                                "what was held is sent when the window ends"},
    },
}
