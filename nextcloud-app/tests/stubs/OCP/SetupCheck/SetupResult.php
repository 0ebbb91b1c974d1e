<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\SetupCheck;

/**
 * In Nextcloud a non-null $descriptionParameters is validated as rich text through the
 * server container; the app never passes them, so the stub refuses them outright.
 */
class SetupResult implements \JsonSerializable {
	public const SUCCESS = 'success';
	public const INFO = 'info';
	public const WARNING = 'warning';
	public const ERROR = 'error';

	private ?string $name = null;

	private function __construct(
		private string $severity,
		private ?string $description = null,
		private ?array $descriptionParameters = null,
		private ?string $linkToDoc = null,
	) {
		if ($description !== null && $descriptionParameters !== null) {
			throw new \LogicException('rich-text parameters need the server container');
		}
	}

	public static function success(?string $description = null, ?string $linkToDoc = null, ?array $descriptionParameters = null): self {
		return new self(self::SUCCESS, $description, $descriptionParameters, $linkToDoc);
	}

	public static function info(?string $description = null, ?string $linkToDoc = null, ?array $descriptionParameters = null): self {
		return new self(self::INFO, $description, $descriptionParameters, $linkToDoc);
	}

	public static function warning(?string $description = null, ?string $linkToDoc = null, ?array $descriptionParameters = null): self {
		return new self(self::WARNING, $description, $descriptionParameters, $linkToDoc);
	}

	public static function error(?string $description = null, ?string $linkToDoc = null, ?array $descriptionParameters = null): self {
		return new self(self::ERROR, $description, $descriptionParameters, $linkToDoc);
	}

	public function getSeverity(): string {
		return $this->severity;
	}

	public function getDescription(): ?string {
		return $this->description;
	}

	public function getDescriptionParameters(): ?array {
		return $this->descriptionParameters;
	}

	public function getName(): ?string {
		return $this->name;
	}

	public function setName(string $name): void {
		$this->name = $name;
	}

	public function getLinkToDoc(): ?string {
		return $this->linkToDoc;
	}

	public function jsonSerialize(): array {
		return [
			'name' => $this->name,
			'severity' => $this->severity,
			'description' => $this->description,
			'descriptionParameters' => $this->descriptionParameters,
			'linkToDoc' => $this->linkToDoc,
		];
	}
}
