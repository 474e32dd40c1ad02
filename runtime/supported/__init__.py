"""Handwritten implementations of the manifest's `supported` ops, by family. Each is
named impl_<unambiguous name> and takes the schema's parameters (codegen checks)."""
