-- The same three writes as scripts/pgbench-tasks.sql, in the statements a Shoal task costs
-- today on PostgreSQL (16 per task; Shoal's claim takes up to 8 tasks per transaction, so it
-- sends ~14, plus ~2 of outbox sequencing): each transaction opens with BEGIN, reads or locks
-- before it writes, stages an outbox row, and ends with COMMIT. It shows what the number of
-- statements alone costs. Run by scripts/bench-postgres; pgbench's "tps" is tasks/s.
\set id random(1, 2000000000)
BEGIN;
SELECT 1 FROM bench_groups WHERE id = :id;
INSERT INTO bench_tasks (id, state, body) VALUES (:id, 'pending', repeat('x', 800)) ON CONFLICT DO NOTHING;
INSERT INTO bench_outbox (body) VALUES (repeat('m', 1500));
COMMIT;
BEGIN;
SELECT state FROM bench_tasks WHERE id = :id FOR UPDATE;
UPDATE bench_tasks SET state = 'running', body = repeat('y', 800) WHERE id = :id;
COMMIT;
BEGIN;
SELECT state FROM bench_tasks WHERE id = :id FOR UPDATE;
UPDATE bench_tasks SET state = 'completed', body = repeat('z', 800) WHERE id = :id;
SELECT 1 FROM bench_groups WHERE id = :id;
SELECT EXISTS (SELECT 1 FROM bench_tasks WHERE id = :id AND state = 'pending');
INSERT INTO bench_outbox (body) VALUES (repeat('m', 1500));
COMMIT;
