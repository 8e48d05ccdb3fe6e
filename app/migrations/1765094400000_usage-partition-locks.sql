-- Up Migration

-- Usage partitions made and retired under locks taken in a safe order, and the idempotency
-- key guard kept from telling a tenant about another account's keys (docs/operations.md,
-- "Usage partitions"). Functions only: the previous release calls usage_ensure_partitions and
-- usage_retire_day with the same arguments and answers, and gets the same fixes.
SET LOCAL lock_timeout = '5s';

-- `name`, a partition of `parent` for [lo, hi), unless it exists or the range is another
-- partition's (the table that was `usage`, up to the day it became a partition).
--   - parent's SHARE ROW EXCLUSIVE lock comes first: an insert picks its partition once it
--     holds its lock on parent, so the inserts in flight finish routed to the default
--     partition (whose rows then move) and the later ones are routed to the new partition.
--     Without it, an insert routed to the default partition before the attach is refused by it
--     after (23514). The lock is self-exclusive, so two makers also take turns.
--   - every lock is waited for at most lock_timeout: attaching takes the default partition's
--     ACCESS EXCLUSIVE lock, which queues behind any reader of it, and every later usage query
--     queues behind that. The caller skips the day (usage_ensure_days).
CREATE OR REPLACE FUNCTION usage_make_partition(parent text, name text, lo timestamptz, hi timestamptz) RETURNS integer
LANGUAGE plpgsql SET search_path = public, pg_temp SET lock_timeout = '500ms' AS $$
DECLARE
  fallback text := parent || '_default';
BEGIN
  IF to_regclass(name) IS NOT NULL THEN
    RETURN 0;
  END IF;
  EXECUTE format('LOCK TABLE %I IN SHARE ROW EXCLUSIVE MODE', parent);
  -- Another maker may have made it while this one waited.
  IF to_regclass(name) IS NOT NULL THEN
    RETURN 0;
  END IF;
  BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name, parent);
    IF to_regclass(fallback) IS NOT NULL THEN
      EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', fallback);
      EXECUTE format('WITH moved AS (DELETE FROM %I WHERE occurred_at >= $1 AND occurred_at < $2 RETURNING *) INSERT INTO %I SELECT * FROM moved', fallback, name) USING lo, hi;
    END IF;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', parent, name, lo, hi);
  EXCEPTION WHEN invalid_object_definition THEN
    -- "would overlap partition": the range is the former table's.
    RETURN 0;
  END;
  RETURN 1;
END $$;

-- The daily partitions of usage for first..last (UTC days), and the monthly ones of
-- usage_keys, that are missing: how many were made, and the days skipped because a lock was
-- not granted within usage_make_partition's lock_timeout. The days after a skipped one would
-- wait on the same lock, so they are skipped too; the next run makes them (the migrate command
-- and data-cleanup make days ahead, so one run's miss is harmless). One caller at a time:
-- a transaction's advisory lock, so a migrate and data-cleanup both succeed.
CREATE FUNCTION usage_ensure_days(first date, last date, OUT made integer, OUT skipped date[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  d date;
  m date;
  n integer;
BEGIN
  made := 0;
  skipped := '{}';
  IF (SELECT relkind FROM pg_class WHERE oid = 'usage'::regclass) <> 'p' THEN
    RETURN;
  END IF;
  IF last - first > 400 THEN
    RAISE EXCEPTION 'usage_ensure_partitions: % to % is more than 400 days', first, last;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('ecs-saas-backend:usage-partition-makers', 0));
  FOR d IN SELECT generate_series(first, last, interval '1 day')::date LOOP
    IF cardinality(skipped) > 0 THEN
      skipped := skipped || d;
      CONTINUE;
    END IF;
    m := date_trunc('month', d)::date;
    BEGIN
      n := usage_make_partition('usage', 'usage_d' || to_char(d, 'YYYYMMDD'),
        d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
      n := n + usage_make_partition('usage_keys', 'usage_keys_m' || to_char(m, 'YYYYMM'),
        m::timestamp AT TIME ZONE 'UTC', (m + interval '1 month')::timestamp AT TIME ZONE 'UTC');
      made := made + n;
    EXCEPTION WHEN lock_not_available THEN
      skipped := skipped || d;
    END;
  END LOOP;
END $$;
REVOKE ALL ON FUNCTION usage_ensure_days(date, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION usage_ensure_days(date, date) TO ecs_saas_retention;

-- The number usage_ensure_days made: the previous release's call.
CREATE OR REPLACE FUNCTION usage_ensure_partitions(first date, last date) RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
  SELECT made FROM usage_ensure_days(first, last)
$$;

-- Retires one expired day: its partition is detached and dropped, in one short transaction,
-- once billing-run and then report-aggregation have finished the day (usage_days). The rows
-- no invoice counts move to usage_unbilled first; they can only be those of an account whose
-- status changed since the day began (account_status_changes). The outcome says what was
-- done, or why the day is kept. data-cleanup calls it as ecs_saas_retention.
--
-- The locks come first, and what the day holds is read after: a report for the day that
-- commits while the function waits is then seen (each statement of a function takes a new
-- snapshot under READ COMMITTED), and none can commit after. The order is the API's (the
-- account, then usage), so a report holding its account cannot deadlock with the drop,
-- which needs accounts' ACCESS EXCLUSIVE lock for the partition's foreign key.
CREATE OR REPLACE FUNCTION usage_retire_day(d date) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  part text := 'usage_d' || to_char(d, 'YYYYMMDD');
  marks usage_days%ROWTYPE;
  kept bigint := 0;
  empty boolean;
  horizon date;
  keys text;
BEGIN
  IF d >= (now() AT TIME ZONE 'UTC')::date - 1 THEN
    RAISE EXCEPTION 'usage_retire_day: % is not a day old yet', d;
  END IF;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'usage_retire_day: needs READ COMMITTED, to see the reports that commit while it waits for its locks';
  END IF;
  IF to_regclass(part) IS NULL THEN
    RETURN 'gone';
  END IF;
  -- Queries wait behind these locks at most this long, and the caller tries again later.
  PERFORM set_config('lock_timeout', '500ms', true);
  LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE;
  LOCK TABLE usage IN ACCESS EXCLUSIVE MODE;
  IF to_regclass(part) IS NULL THEN
    RETURN 'gone';
  END IF;
  EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', part);
  SELECT * INTO marks FROM usage_days u WHERE u.day = d;
  EXECUTE format('SELECT NOT EXISTS (SELECT FROM %I)', part) INTO empty;
  -- A day without usage (made ahead, or before the first account) has nothing to account for.
  IF NOT empty THEN
    IF marks.billed_at IS NULL THEN
      RETURN 'kept: billing-run has not finished the day';
    END IF;
    IF marks.rolled_up_at IS NULL OR marks.rolled_up_at < marks.billed_at THEN
      RETURN 'kept: report-aggregation has not rolled the day up since it was billed';
    END IF;
    EXECUTE format(
      'INSERT INTO usage_unbilled (id, account_id, metric, quantity, occurred_at, idempotency_key, created_at)
       SELECT u.id, u.account_id, u.metric, u.quantity, u.occurred_at, u.idempotency_key, u.created_at FROM %I u
       WHERE u.account_id IN (SELECT s.account_id FROM account_status_changes s WHERE s.changed_at >= $1)
         AND NOT EXISTS (SELECT FROM invoices i WHERE i.account_id = u.account_id AND i.period_start = $2)
       ON CONFLICT (id) DO NOTHING', part)
      USING d::timestamp AT TIME ZONE 'UTC' - interval '5 minutes', d;
    GET DIAGNOSTICS kept = ROW_COUNT;
  END IF;
  EXECUTE format('ALTER TABLE usage DETACH PARTITION %I', part);
  EXECUTE format('DROP TABLE %I', part);
  UPDATE usage_days u SET retired_at = now() WHERE u.day = d;
  -- What a day still partitioned may need goes only once every day before it is retired: an
  -- earlier day kept (not yet billed, say) keeps the idempotency keys of its month and of the
  -- months after, and the status changes that say which of its rows no invoice counts. What
  -- every remaining day is past goes: the keys of each month before the first of them (the
  -- months of days retired after a kept one too), and the status changes before it.
  SELECT coalesce(min(x), d + 1) INTO horizon FROM usage_partition_days() x;
  FOR keys IN
    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'usage_keys'::regclass AND c.relname ~ '^usage_keys_m[0-9]{6}$'
      AND to_date(substr(c.relname, 13), 'YYYYMM') + interval '1 month' <= horizon
  LOOP
    EXECUTE format('ALTER TABLE usage_keys DETACH PARTITION %I', keys);
    EXECUTE format('DROP TABLE %I', keys);
  END LOOP;
  DELETE FROM account_status_changes WHERE changed_at < horizon::timestamp AT TIME ZONE 'UTC' - interval '5 minutes';
  RETURN CASE WHEN kept = 0 THEN 'retired' ELSE format('retired; %s row(s) no invoice counted kept in usage_unbilled', kept) END;
END $$;

-- An idempotency key once per account, across every partition (the previous migration's
-- usage_key_guard), but for a tenant's row for another account: usage's policy refuses that
-- row, and Postgres checks the policy after this trigger, so the key is not looked at and
-- the refusal (42501) does not say whether the other account used it.
CREATE OR REPLACE FUNCTION usage_key_guard() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF NEW.idempotency_key IS NULL THEN
    RETURN NEW;
  END IF;
  IF current_setting('app.operator', true) = 'off' AND NEW.account_id IS DISTINCT FROM nullif(current_setting('app.account_id', true), '')::bigint THEN
    RETURN NEW;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtext('ecs-saas-backend:usage-key'), hashtext(NEW.account_id || ':' || NEW.idempotency_key) & 511);
  IF EXISTS (SELECT FROM usage_keys k WHERE k.account_id = NEW.account_id AND k.idempotency_key = NEW.idempotency_key) THEN
    RETURN NULL;
  END IF;
  IF to_regclass('usage_legacy') IS NOT NULL THEN
    IF EXISTS (SELECT FROM usage_legacy l WHERE l.account_id = NEW.account_id AND l.idempotency_key = NEW.idempotency_key) THEN
      RETURN NULL;
    END IF;
  END IF;
  INSERT INTO usage_keys (account_id, idempotency_key, occurred_at, usage_id) VALUES (NEW.account_id, NEW.idempotency_key, NEW.occurred_at, NEW.id);
  RETURN NEW;
END $$;

-- Down Migration
-- By hand: rerun the previous migration's definitions of usage_make_partition,
-- usage_ensure_partitions, usage_key_guard and usage_retire_day, then drop usage_ensure_days.
