// Not a test binary: built with the project, never run by the tool.
int main() { return 3; }
