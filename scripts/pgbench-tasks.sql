-- The physical reference for Shoal's throughput benchmark on PostgreSQL: what one task costs
-- at the least, three commits (create, claim, complete) on one row of a similar size.
-- Run by scripts/bench-postgres; pgbench's "tps" is tasks/s.
\set id random(1, 2000000000)
INSERT INTO bench_tasks (id, state, body) VALUES (:id, 'pending', repeat('x', 800)) ON CONFLICT DO NOTHING;
UPDATE bench_tasks SET state = 'running', body = repeat('y', 800) WHERE id = :id;
UPDATE bench_tasks SET state = 'completed', body = repeat('z', 800) WHERE id = :id;
