"""Helpers shared by test modules. Test modules import these, never each other."""
