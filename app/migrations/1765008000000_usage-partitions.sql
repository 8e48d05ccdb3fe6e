-- Up Migration

-- Usage partitioned by UTC day (docs/operations.md, "Usage partitions"): what the partitioned
-- table needs, made ahead of it. The move of `usage` itself (app/usage-partitions.ts) runs
-- after the migrations, once no session of a release that predates this one is connected:
-- that release inserts with `ON CONFLICT (account_id, idempotency_key)`, which a partitioned
-- table cannot serve. Nothing here touches a table the previous release uses, but for one
-- trigger on accounts (a SHARE ROW EXCLUSIVE lock, bounded below).
SET LOCAL lock_timeout = '5s';

-- One row per UTC day of usage: when billing-run and report-aggregation last finished it
-- whole (no account skipped), and when data-cleanup retired its partition.
CREATE TABLE usage_days (
  day          date        PRIMARY KEY,
  billed_at    timestamptz,
  rolled_up_at timestamptz,
  retired_at   timestamptz
);
GRANT SELECT, INSERT (day, billed_at), UPDATE (billed_at) ON usage_days TO ecs_saas_billing;
GRANT SELECT, INSERT (day, rolled_up_at), UPDATE (rolled_up_at) ON usage_days TO ecs_saas_reporting;
GRANT SELECT ON usage_days TO ecs_saas_retention;

-- Every change of an account's status, by whoever makes it. Usage is stored only for an
-- active account (policy billable) and billing-run invoices every active account, so a usage
-- row that no invoice counts belongs to an account whose status changed after its day began:
-- retiring a day looks at those accounts alone, not at the day's rows.
CREATE TABLE account_status_changes (
  account_id bigint      NOT NULL REFERENCES accounts (id),
  status     text        NOT NULL,
  changed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX account_status_changes_at ON account_status_changes (changed_at);
CREATE FUNCTION accounts_note_status() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  INSERT INTO account_status_changes (account_id, status) VALUES (NEW.id, NEW.status);
  RETURN NULL;
END $$;
CREATE TRIGGER note_status AFTER UPDATE OF status ON accounts FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION accounts_note_status();

-- Usage no invoice counted, kept when its day's partition is retired (an account suspended
-- before billing reached it). Read by a DBA only; no role of the API or the jobs reads it.
CREATE TABLE usage_unbilled (
  id              bigint      PRIMARY KEY,
  account_id      bigint      NOT NULL REFERENCES accounts (id),
  metric          text        NOT NULL,
  quantity        bigint      NOT NULL,
  occurred_at     timestamptz NOT NULL,
  idempotency_key text,
  created_at      timestamptz NOT NULL,
  archived_at     timestamptz NOT NULL DEFAULT now()
);

-- The idempotency keys, one row per key, partitioned by month of the usage's day: Postgres
-- keeps a unique index of a partitioned table only per partition unless it includes the
-- partition key, so the key's uniqueness across days is usage_key_guard's, one index probe per
-- month partition, and a month's keys go when its last day is retired.
CREATE TABLE usage_keys (
  account_id      bigint      NOT NULL,
  idempotency_key text        NOT NULL,
  occurred_at     timestamptz NOT NULL,
  usage_id        bigint      NOT NULL
) PARTITION BY RANGE (occurred_at);
CREATE INDEX usage_keys_account_key ON usage_keys (account_id, idempotency_key);
CREATE TABLE usage_keys_default PARTITION OF usage_keys DEFAULT;
ALTER TABLE usage_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON usage_keys FOR SELECT TO ecs_saas_app
  USING (current_setting('app.operator', true) = 'on' OR account_id = nullif(current_setting('app.account_id', true), '')::bigint);
CREATE POLICY operator_read ON usage_keys FOR SELECT TO ecs_saas_operator USING (true);
GRANT SELECT ON usage_keys TO ecs_saas_app, ecs_saas_operator;

-- `name`, a partition of `parent` for [lo, hi), unless it exists or the range is another
-- partition's (the table that was `usage`, up to the day it became a partition). Rows the
-- default partition holds for the range move in first: Postgres refuses to attach otherwise.
CREATE FUNCTION usage_make_partition(parent text, name text, lo timestamptz, hi timestamptz) RETURNS integer
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
DECLARE
  fallback text := parent || '_default';
BEGIN
  IF to_regclass(name) IS NOT NULL THEN
    RETURN 0;
  END IF;
  BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name, parent);
    IF to_regclass(fallback) IS NOT NULL THEN
      EXECUTE format('LOCK TABLE %I IN SHARE ROW EXCLUSIVE MODE', fallback);
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
-- usage_keys, that are missing; the number made. Run by the migrate command and by
-- data-cleanup (ahead of time), as the owner.
CREATE FUNCTION usage_ensure_partitions(first date, last date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  d date;
  m date;
  made integer := 0;
BEGIN
  IF (SELECT relkind FROM pg_class WHERE oid = 'usage'::regclass) <> 'p' THEN
    RETURN 0;
  END IF;
  IF last - first > 400 THEN
    RAISE EXCEPTION 'usage_ensure_partitions: % to % is more than 400 days', first, last;
  END IF;
  FOR d IN SELECT generate_series(first, last, interval '1 day')::date LOOP
    made := made + usage_make_partition('usage', 'usage_d' || to_char(d, 'YYYYMMDD'),
      d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
    m := date_trunc('month', d)::date;
    made := made + usage_make_partition('usage_keys', 'usage_keys_m' || to_char(m, 'YYYYMM'),
      m::timestamp AT TIME ZONE 'UTC', (m + interval '1 month')::timestamp AT TIME ZONE 'UTC');
  END LOOP;
  RETURN made;
END $$;
REVOKE ALL ON FUNCTION usage_make_partition(text, text, timestamptz, timestamptz), usage_ensure_partitions(date, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION usage_ensure_partitions(date, date) TO ecs_saas_retention;

-- An idempotency key once per account, across every partition: one writer of a key at a
-- time (an advisory lock for the transaction, on one of 512 buckets the keys hash to, so a
-- bulk insert holds at most 512 locks), then one probe of usage_keys, and of the former
-- table while it is a partition (its own unique index holds the keys it had). A key seen
-- before skips the row, as ON CONFLICT DO NOTHING would: the caller then finds the original.
CREATE FUNCTION usage_key_guard() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF NEW.idempotency_key IS NULL THEN
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

-- Retires one expired day: its partition is detached and dropped, in one short transaction,
-- once billing-run and then report-aggregation have finished the day (usage_days). The rows
-- no invoice counts move to usage_unbilled first; they can only be those of an account whose
-- status changed since the day began (account_status_changes, above). The outcome says what
-- was done, or why the day is kept. data-cleanup calls it as ecs_saas_retention.
CREATE FUNCTION usage_retire_day(d date) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  part text := 'usage_d' || to_char(d, 'YYYYMMDD');
  marks usage_days%ROWTYPE;
  kept bigint := 0;
  empty boolean;
  month_end date := (date_trunc('month', d) + interval '1 month')::date;
BEGIN
  IF d >= (now() AT TIME ZONE 'UTC')::date - 1 THEN
    RAISE EXCEPTION 'usage_retire_day: % is not a day old yet', d;
  END IF;
  IF to_regclass(part) IS NULL THEN
    RETURN 'gone';
  END IF;
  -- Detaching takes an exclusive lock on usage for a moment, once the transactions reading it
  -- are done; queries wait behind it at most this long, and the caller tries again later.
  PERFORM set_config('lock_timeout', '500ms', true);
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
  -- The month's keys go with its last day.
  IF NOT EXISTS (
    SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'usage'::regclass AND c.relname ~ '^usage_d[0-9]{8}$' AND c.relname < 'usage_d' || to_char(month_end, 'YYYYMMDD')
  ) AND to_regclass('usage_keys_m' || to_char(d, 'YYYYMM')) IS NOT NULL THEN
    EXECUTE format('ALTER TABLE usage_keys DETACH PARTITION %I', 'usage_keys_m' || to_char(d, 'YYYYMM'));
    EXECUTE format('DROP TABLE %I', 'usage_keys_m' || to_char(d, 'YYYYMM'));
  END IF;
  DELETE FROM account_status_changes WHERE changed_at < d::timestamp AT TIME ZONE 'UTC' - interval '5 minutes';
  RETURN CASE WHEN kept = 0 THEN 'retired' ELSE format('retired; %s row(s) no invoice counted kept in usage_unbilled', kept) END;
END $$;
REVOKE ALL ON FUNCTION usage_retire_day(date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION usage_retire_day(date) TO ecs_saas_retention;

-- The days that have a partition of their own, oldest first.
CREATE FUNCTION usage_partition_days() RETURNS SETOF date
LANGUAGE sql STABLE SET search_path = public, pg_temp AS $$
  SELECT to_date(substr(c.relname, 8), 'YYYYMMDD') FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = 'usage'::regclass AND c.relname ~ '^usage_d[0-9]{8}$' ORDER BY 1
$$;

-- The former table, once the rows retention deletes one by one have left it empty and its
-- range has expired: dropped whole.
CREATE FUNCTION usage_retire_legacy(before timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  upper_bound timestamptz;
BEGIN
  IF to_regclass('usage_legacy') IS NULL THEN
    RETURN false;
  END IF;
  SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz INTO upper_bound
  FROM pg_class c WHERE c.oid = 'usage_legacy'::regclass;
  IF upper_bound IS NULL OR upper_bound > before OR EXISTS (SELECT FROM usage_legacy) THEN
    RETURN false;
  END IF;
  ALTER TABLE usage DETACH PARTITION usage_legacy;
  DROP TABLE usage_legacy;
  RETURN true;
END $$;
REVOKE ALL ON FUNCTION usage_retire_legacy(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION usage_retire_legacy(timestamptz) TO ecs_saas_retention;

-- Down Migration
-- Only while usage is one table (before app/usage-partitions.ts moved it): the partitioned
-- table's trigger and partitions depend on what this drops.
DROP FUNCTION usage_retire_legacy(timestamptz);
DROP FUNCTION usage_partition_days();
DROP FUNCTION usage_retire_day(date);
DROP FUNCTION usage_key_guard();
DROP FUNCTION usage_ensure_partitions(date, date);
DROP FUNCTION usage_make_partition(text, text, timestamptz, timestamptz);
DROP TABLE usage_keys;
DROP TABLE usage_unbilled;
DROP TRIGGER note_status ON accounts;
DROP FUNCTION accounts_note_status();
DROP TABLE account_status_changes;
DROP TABLE usage_days;
