"""Tables tests print at the end of the run (conftest's terminal summary shows them)."""

TABLES: list[tuple[str, list[str]]] = []


def add(title: str, lines: list[str]) -> None:
    TABLES.append((title, lines))
