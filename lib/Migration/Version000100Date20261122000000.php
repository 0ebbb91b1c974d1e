<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Migration;

use Closure;
use OCA\Istota\Db\OutboxMapper;
use OCP\DB\ISchemaWrapper;
use OCP\DB\Types;
use OCP\Migration\IOutput;
use OCP\Migration\SimpleMigrationStep;

/**
 * Creates istota_outbox: Talk events the sidecar could not take yet, delivered later in
 * id order by the FlushOutbox job. Text columns that may be empty are nullable because
 * Oracle stores '' as NULL.
 */
class Version000100Date20261122000000 extends SimpleMigrationStep {
	public function changeSchema(IOutput $output, Closure $schemaClosure, array $options): ?ISchemaWrapper {
		/** @var ISchemaWrapper $schema */
		$schema = $schemaClosure();
		if ($schema->hasTable(OutboxMapper::TABLE)) {
			return null;
		}

		$table = $schema->createTable(OutboxMapper::TABLE);
		$table->addColumn('id', Types::BIGINT, [
			'autoincrement' => true,
			'notnull' => true,
			'length' => 20,
			'unsigned' => true,
		]);
		// The exact JSON body of POST /v1/talk/events; signed anew at every attempt.
		$table->addColumn('body', Types::TEXT, [
			'notnull' => true,
		]);
		$table->addColumn('conversation_token', Types::STRING, [
			'notnull' => false,
			'length' => OutboxMapper::MAX_ID_LENGTH,
		]);
		$table->addColumn('message_id', Types::STRING, [
			'notnull' => false,
			'length' => OutboxMapper::MAX_ID_LENGTH,
		]);
		$table->addColumn('created_at', Types::BIGINT, [
			'notnull' => true,
			'default' => 0,
			'unsigned' => true,
		]);
		$table->addColumn('attempts', Types::INTEGER, [
			'notnull' => true,
			'default' => 0,
			'unsigned' => true,
		]);
		$table->addColumn('last_error', Types::STRING, [
			'notnull' => false,
			'length' => OutboxMapper::MAX_ERROR_LENGTH,
		]);
		$table->addColumn('next_attempt_at', Types::BIGINT, [
			'notnull' => true,
			'default' => 0,
			'unsigned' => true,
		]);
		$table->setPrimaryKey(['id']);
		return $schema;
	}
}
