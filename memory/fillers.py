"""Turns that carry no fact: what ingestion skips (reason ``no_fact``) instead of storing.

Pure: no Django, no database. The rule, whole: set aside what a turn says in parentheses;
a turn carries no fact when what is left is at most ``MAX_FILLER_WORDS`` words, each of them
in ``FILLER_WORDS`` (acknowledgements, thanks, greetings, agreement, hesitation, laughter).
A word holding a digit is never filler (a number is a fact: a seat, a time, a count).
"Thanks!", "OK, got it.", "Sounds good, see you" and a model's "Noted (42 characters, 3
contents)." carry none; "Thanks, I fly on Friday", "No, my seat is 14C" and "ok 3" do. A
turn of no words at all (only an emoji, only punctuation) carries no fact either.

Only ingestion of session turns applies it: an explicit add stores what it is given.
"""

from __future__ import annotations

import re

from memory.similarity import normalised

MAX_FILLER_WORDS = 8

FILLER_WORDS = frozenset(
    """
    ok okay okey k kk alright allright right sure yes yeah yep yup ya aye no nope nah
    thanks thank thx ty cheers you u very much so lot many a
    cool great nice good fine awesome perfect lovely wonderful excellent brilliant amazing
    fantastic super neat sweet splendid
    got it gotcha understood understand see noted done will do roger copy that
    sounds seems looks makes sense agreed agree indeed exactly absolutely definitely
    certainly totally of course true correct
    hi hello hey hiya howdy bye goodbye later soon take care night morning evening
    welcome np problem worries prob pleasure glad happy help to
    hmm hm mhm mm uh um uhm huh ah oh ooh wow whoa oops ugh aha
    lol lmao haha hahaha hehe heh rofl xd
    please sorry excuse me my bad pardon
    and then well just too also really
    """.split()
)

_ASIDE = re.compile(r"\([^()]*\)")
_WORD = re.compile(r"\w+")


def carries_no_fact(text: str) -> bool:
    """Whether ``text`` is filler by the module's rule."""
    kept = _WORD.findall(_ASIDE.sub(" ", normalised(text)))
    return len(kept) <= MAX_FILLER_WORDS and all(word in FILLER_WORDS for word in kept)
