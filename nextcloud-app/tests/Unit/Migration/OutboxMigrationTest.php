<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Migration;

use OCA\Istota\Migration\Version000100Date20261122000000;
use OCA\Istota\Tests\Support\RecordingOutput;
use OCA\Istota\Tests\Support\SqliteConnection;
use OCA\Istota\Tests\Support\SqliteSchema;
use PHPUnit\Framework\TestCase;

class OutboxMigrationTest extends TestCase {
	private string $path;
	private SqliteConnection $db;

	protected function setUp(): void {
		$this->path = sys_get_temp_dir() . '/istota-migration-' . bin2hex(random_bytes(6)) . '.sqlite';
		$this->db = new SqliteConnection($this->path);
	}

	protected function tearDown(): void {
		@unlink($this->path);
	}

	public function testCreatesTheOutboxTable(): void {
		$created = SqliteSchema::migrate($this->db, new Version000100Date20261122000000(), new RecordingOutput());
		$this->assertSame(['istota_outbox'], $created);
		$this->assertTrue($this->db->tableExists('istota_outbox'));

		$columns = [];
		foreach ($this->db->pdo()->query('PRAGMA table_info("oc_istota_outbox")')->fetchAll() as $column) {
			$columns[$column['name']] = ['type' => $column['type'], 'notnull' => (int)$column['notnull'], 'pk' => (int)$column['pk']];
		}
		$this->assertSame(['id', 'body', 'conversation_token', 'message_id', 'created_at', 'attempts', 'last_error', 'next_attempt_at'], array_keys($columns));
		$this->assertSame(1, $columns['id']['pk']);
		$this->assertSame('CLOB', $columns['body']['type']);
		$this->assertSame(1, $columns['body']['notnull']);
		$this->assertSame(0, $columns['last_error']['notnull'], 'Oracle stores "" as NULL, so it must be nullable');
	}

	public function testRunningAgainChangesNothing(): void {
		SqliteSchema::migrate($this->db, new Version000100Date20261122000000(), new RecordingOutput());
		$this->assertSame([], SqliteSchema::migrate($this->db, new Version000100Date20261122000000(), new RecordingOutput()));
	}
}
