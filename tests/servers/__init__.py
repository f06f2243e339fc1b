"""Local HTTP servers implementing the documented REST contracts of services tests cannot reach."""
