package cluster

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Controls are the operators' controls of replicas (drain, disable), kept
// in one Redis hash so that every gateway of the cluster applies them: a
// gateway sets one, the others read the hash (Controls.All) and apply what
// changed. A replica absent from the hash is enabled.
type Controls struct {
	rc  redis.UniversalClient
	key string
}

// NewControls returns the controls of the cluster called name.
func NewControls(rc redis.UniversalClient, name string) *Controls {
	return &Controls{rc: rc, key: "{" + name + "}:controls"}
}

// Set records control ("enabled" removes the entry) for replica.
func (c *Controls) Set(ctx context.Context, replica, control string) error {
	var err error
	if control == "enabled" {
		err = c.rc.HDel(ctx, c.key, replica).Err()
	} else {
		err = c.rc.HSet(ctx, c.key, replica, control).Err()
	}
	if err != nil {
		return fmt.Errorf("cluster: replica controls: %w", err)
	}
	return nil
}

// All returns every replica's control that is not "enabled".
func (c *Controls) All(ctx context.Context) (map[string]string, error) {
	m, err := c.rc.HGetAll(ctx, c.key).Result()
	if err != nil {
		return nil, fmt.Errorf("cluster: replica controls: %w", err)
	}
	return m, nil
}
