"""Hidden criteria, one module per exercise. Each module names its EXERCISE; each test is a criterion."""
