<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IDBConnection;
use PDO;

/**
 * SqliteConnection is a real SQLite database (PDO) behind the OCP IDBConnection API, with
 * Nextcloud's default table prefix "oc_". Tests get the schema from the app's own migration.
 */
final class SqliteConnection implements IDBConnection {
	public const PREFIX = 'oc_';

	private PDO $pdo;

	public function __construct(string $path) {
		$this->pdo = new PDO('sqlite:' . $path, null, null, [
			PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
			PDO::ATTR_DEFAULT_FETCH_MODE => PDO::FETCH_ASSOC,
		]);
		$this->pdo->exec('PRAGMA busy_timeout = 5000');
	}

	public function getQueryBuilder(): SqliteQueryBuilder {
		return new SqliteQueryBuilder($this);
	}

	public function pdo(): PDO {
		return $this->pdo;
	}

	public function prefixed(string $table): string {
		return self::PREFIX . $table;
	}

	public function tableExists(string $table): bool {
		$st = $this->pdo->prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
		$st->execute([$this->prefixed($table)]);
		return $st->fetchColumn() !== false;
	}

	/** @return list<array<string, mixed>> every row of a table, in id order (for assertions) */
	public function rows(string $table): array {
		return $this->pdo->query('SELECT * FROM "' . $this->prefixed($table) . '" ORDER BY id')->fetchAll();
	}
}
