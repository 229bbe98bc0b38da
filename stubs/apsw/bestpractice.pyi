# Loose stub: apsw rows are dynamically typed; the code that decodes them checks them.
from typing import Any

def __getattr__(name: str) -> Any: ...
