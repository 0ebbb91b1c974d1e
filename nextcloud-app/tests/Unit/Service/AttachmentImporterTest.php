<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Service;

use OCA\Istota\Service\AttachmentImporter;
use PHPUnit\Framework\TestCase;

class AttachmentImporterTest extends TestCase {
	/** @return array<string, array{0: string, 1: string}> */
	public function names(): array {
		return [
			'plain' => ['report.pdf', 'report.pdf'],
			'unicode kept' => ['Über Ärger – 2026.txt', 'Über Ärger – 2026.txt'],
			'two extensions' => ['archive.tar.gz', 'archive.tar.gz'],
			'no extension' => ['Makefile', 'Makefile'],
			'path traversal' => ['../../etc/passwd', 'etcpasswd'],
			'backslashes' => ['C:\\Users\\a.txt', 'C:Usersa.txt'],
			'newline and tab' => ["line\nbreak\t.md", 'linebreak.md'],
			'NUL and DEL' => ["a\x00b\x7fc.txt", 'abc.txt'],
			'right-to-left override' => ["invoice\u{202E}fdp.exe", 'invoicefdp.exe'],
			'line separator' => ["a\u{2028}b.txt", 'ab.txt'],
			'hidden file' => ['.htaccess', 'htaccess'],
			'leading spaces and dots' => ['  . .secret.txt', 'secret.txt'],
			'trailing dots and spaces' => ['notes. . ', 'notes'],
			'only dots' => ['..', 'attachment'],
			'only separators' => ['///', 'attachment'],
			'empty' => ['', 'attachment'],
			'invalid UTF-8' => ["bad\xff.txt", 'bad?.txt'],
			'long extension is part of the name' => ['a.thisisaverylongextension', 'a.thisisaverylongextension'],
		];
	}

	/** @dataProvider names */
	public function testSafeName(string $name, string $want): void {
		$this->assertSame($want, AttachmentImporter::safeName($name));
	}

	public function testLongNamesAreCutKeepingTheExtension(): void {
		$ascii = AttachmentImporter::safeName(str_repeat('a', 300) . '.pdf');
		$this->assertSame(str_repeat('a', 196) . '.pdf', $ascii);

		$multibyte = AttachmentImporter::safeName(str_repeat('é', 150) . '.txt');
		$this->assertSame(str_repeat('é', 98) . '.txt', $multibyte, 'cut on a character boundary');
		$this->assertTrue(mb_check_encoding($multibyte, 'UTF-8'));
	}

	private static function activity(string $name, array $parameters, string $type = 'Activity'): array {
		return [
			'type' => $type,
			'actor' => ['type' => 'Person', 'id' => 'users/alice', 'name' => 'Alice'],
			'object' => ['type' => 'Note', 'id' => '5', 'name' => $name, 'content' => json_encode(['message' => '{file}', 'parameters' => $parameters]), 'mediaType' => 'text/markdown'],
			'target' => ['type' => 'Collection', 'id' => 'tok', 'name' => 'Room'],
		];
	}

	public function testSharedFileRecognisesFileShares(): void {
		$file = ['type' => 'file', 'id' => '12', 'name' => 'a.pdf', 'size' => '3', 'mimetype' => 'application/pdf'];
		foreach (['', 'message', 'file_shared'] as $name) {
			$this->assertSame($file, AttachmentImporter::sharedFile(self::activity($name, ['file' => $file])), $name);
		}
		$this->assertSame(['id' => '12'], AttachmentImporter::sharedFile(self::activity('', ['file' => ['id' => '12']])), 'a missing type is taken as a file');
	}

	public function testSharedFileIgnoresEverythingElse(): void {
		$file = ['type' => 'file', 'id' => '12', 'name' => 'a.pdf'];
		$cases = [
			'chat message' => self::activity('message', ['file' => $file], 'Create'),
			'reaction' => self::activity('', ['file' => $file], 'Like'),
			'other system message' => self::activity('call_started', ['file' => $file]),
			'no parameters' => self::activity('', []),
			'rich object' => self::activity('', ['object' => ['type' => 'talk-poll', 'id' => '1']]),
			'deck card' => self::activity('', ['file' => ['type' => 'deck-card', 'id' => '1']]),
			'file is not an object' => self::activity('', ['file' => '12']),
			'content not JSON' => ['type' => 'Activity', 'object' => ['name' => '', 'content' => '{file']],
			'no object' => ['type' => 'Activity'],
		];
		foreach ($cases as $what => $message) {
			$this->assertNull(AttachmentImporter::sharedFile($message), $what);
		}
	}
}
