namespace arfuse { namespace topo { int placeholder = 0; } }
