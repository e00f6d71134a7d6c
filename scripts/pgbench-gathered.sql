-- The same three writes as scripts/pgbench-tasks.sql for 16 tasks at a time, in the shape of
-- a gathering (crates/store/src/postgres/gather.rs): each transaction locks or reads before it
-- writes, but every statement covers all 16 tasks, with one outbox row per task. It shows what
-- PostgreSQL can do when writes are gathered. Run by scripts/bench-postgres; pgbench's "tps"
-- times 16 is tasks/s.
\set id random(1, 100000000)
\set base :id * 16
BEGIN;
INSERT INTO bench_groups (id) VALUES (:id) ON CONFLICT (id) DO UPDATE SET id = excluded.id;
SELECT id, body FROM bench_tasks WHERE id = ANY (ARRAY(SELECT generate_series(:base, :base + 15)::bigint));
INSERT INTO bench_tasks (id, state, body) SELECT g, 'pending', repeat('x', 800) FROM generate_series(:base, :base + 15) g ON CONFLICT DO NOTHING;
INSERT INTO bench_outbox (body) SELECT repeat('m', 1500) FROM generate_series(1, 16);
COMMIT;
BEGIN;
SELECT state FROM bench_tasks WHERE id BETWEEN :base AND :base + 15 ORDER BY id FOR UPDATE;
UPDATE bench_tasks SET state = 'running', body = repeat('y', 800) WHERE id BETWEEN :base AND :base + 15;
INSERT INTO bench_outbox (body) SELECT repeat('m', 1500) FROM generate_series(1, 16);
COMMIT;
BEGIN;
SELECT state FROM bench_tasks WHERE id BETWEEN :base AND :base + 15 ORDER BY id FOR UPDATE;
UPDATE bench_tasks SET state = 'completed', body = repeat('z', 800) WHERE id BETWEEN :base AND :base + 15;
SELECT id FROM bench_groups WHERE id = :id FOR UPDATE;
SELECT EXISTS (SELECT 1 FROM bench_tasks WHERE id BETWEEN :base AND :base + 15 AND state = 'pending');
INSERT INTO bench_outbox (body) SELECT repeat('m', 1500) FROM generate_series(1, 16);
COMMIT;
