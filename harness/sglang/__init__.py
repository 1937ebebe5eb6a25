"""SGLang deployment: version pin, flag validation, launch plan, server actor, profile control."""
