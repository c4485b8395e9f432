package sessionpool

// ClampPriority is clampPriority for the external tests.
var ClampPriority = clampPriority
