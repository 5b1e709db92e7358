"""The page's side tabs, one module each: its panel's build and the wiring of its events."""
