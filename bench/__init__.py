"""``make bench``: what the speaker-prompt cache saves on a real 200-chunk job (run ``python -m bench``)."""
