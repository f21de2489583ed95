"""The admin's pictures, as a package of their own: what they count (``forecast``: the
occurrences per minute to come; ``lateness``: how late the last runs fired) and how they are
drawn (``drawing``: the figures turned into SVG geometry and text for the templates)."""
