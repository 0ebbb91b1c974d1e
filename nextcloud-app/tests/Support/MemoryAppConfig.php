<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Exceptions\AppConfigTypeConflictException;
use OCP\IAppConfig;

/**
 * MemoryAppConfig keeps app config in memory with the rules of Nextcloud's AppConfig that
 * callers can trip over: a lazy key is only found when read with lazy: true, reading with
 * another type than the stored one throws (untyped "mixed" values read as any type), and
 * once sensitive a key stays sensitive.
 */
final class MemoryAppConfig implements IAppConfig {
	/** @var array<string, array<string, array{value: mixed, type: int, lazy: bool, sensitive: bool}>> */
	private array $values = [];

	/** Stores a value the way `occ config:app:set` without --type does (VALUE_MIXED). */
	public function setMixed(string $app, string $key, string $value): void {
		$this->values[$app][$key] = ['value' => $value, 'type' => self::VALUE_MIXED, 'lazy' => false, 'sensitive' => false];
	}

	public function hasKey(string $app, string $key, ?bool $lazy = false): bool {
		$entry = $this->values[$app][$key] ?? null;
		return $entry !== null && ($lazy === null || $entry['lazy'] === $lazy);
	}

	public function isSensitive(string $app, string $key, ?bool $lazy = false): bool {
		return ($this->values[$app][$key]['sensitive'] ?? false) === true;
	}

	public function isLazy(string $app, string $key): bool {
		return ($this->values[$app][$key]['lazy'] ?? false) === true;
	}

	public function getValueString(string $app, string $key, string $default = '', bool $lazy = false): string {
		return (string)$this->read($app, $key, $default, $lazy, self::VALUE_STRING);
	}

	public function getValueInt(string $app, string $key, int $default = 0, bool $lazy = false): int {
		return (int)$this->read($app, $key, $default, $lazy, self::VALUE_INT);
	}

	public function getValueArray(string $app, string $key, array $default = [], bool $lazy = false): array {
		$value = $this->read($app, $key, $default, $lazy, self::VALUE_ARRAY);
		if (is_string($value)) {
			$value = json_decode($value, true);
		}
		return is_array($value) ? $value : $default;
	}

	public function setValueString(string $app, string $key, string $value, bool $lazy = false, bool $sensitive = false): bool {
		return $this->write($app, $key, $value, self::VALUE_STRING, $lazy, $sensitive);
	}

	public function setValueInt(string $app, string $key, int $value, bool $lazy = false, bool $sensitive = false): bool {
		return $this->write($app, $key, $value, self::VALUE_INT, $lazy, $sensitive);
	}

	public function setValueArray(string $app, string $key, array $value, bool $lazy = false, bool $sensitive = false): bool {
		return $this->write($app, $key, $value, self::VALUE_ARRAY, $lazy, $sensitive);
	}

	public function deleteKey(string $app, string $key): void {
		unset($this->values[$app][$key]);
	}

	private function read(string $app, string $key, mixed $default, bool $lazy, int $type): mixed {
		$entry = $this->values[$app][$key] ?? null;
		if ($entry === null || $entry['lazy'] !== $lazy) {
			return $default;
		}
		if ($entry['type'] !== self::VALUE_MIXED && $entry['type'] !== $type) {
			throw new AppConfigTypeConflictException('conflict with value type from database');
		}
		return $entry['value'];
	}

	private function write(string $app, string $key, mixed $value, int $type, bool $lazy, bool $sensitive): bool {
		$old = $this->values[$app][$key] ?? null;
		if ($old !== null && $old['type'] !== self::VALUE_MIXED && $old['type'] !== $type) {
			throw new AppConfigTypeConflictException('conflict with value type from database');
		}
		$this->values[$app][$key] = [
			'value' => $value,
			'type' => $type,
			'lazy' => $lazy,
			'sensitive' => $sensitive || ($old['sensitive'] ?? false),
		];
		return $old === null || $old['value'] !== $value;
	}
}
